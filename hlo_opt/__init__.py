"""hlo_opt: a graph superoptimizer for JAX.  See README.md and DESIGN.md."""
from hlo_opt.api import Optimized, Options, jit, optimize
from hlo_opt.report import Report

__all__ = ["jit", "optimize", "Optimized", "Options", "Report"]
__version__ = "0.1.0"
