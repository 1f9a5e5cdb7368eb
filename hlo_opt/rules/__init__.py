"""Rules: the language (`lang`), the library by family (`library`), the axioms they are
proven from (`axioms`) and the checks (`verify`)."""
from hlo_opt.rules.axioms import AXIOMS
from hlo_opt.rules.lang import (Build, Const, Fn, Guard, Match, OpVar, Pat, Rule, RuleError,
                                RuleSet, Sym, Tensor, tensors)
from hlo_opt.rules.library import ALL, FAMILIES

__all__ = ["ALL", "AXIOMS", "FAMILIES", "Build", "Const", "Fn", "Guard", "Match", "OpVar",
           "Pat", "Rule", "RuleError", "RuleSet", "Sym", "Tensor", "tensors"]
