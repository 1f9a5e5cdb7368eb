import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)                                         # for `corpus`, `helpers`
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))   # `models`, `bench`
