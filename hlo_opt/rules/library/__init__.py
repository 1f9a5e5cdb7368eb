"""The rule library, one module per family; `ALL` is every rule."""
from hlo_opt.rules.library import algebra, concat_split, conv, fusion, layout, slices

ALL = algebra.RULES + concat_split.RULES + slices.RULES + layout.RULES + conv.RULES + fusion.RULES
FAMILIES = {"algebra": algebra.RULES, "concat_split": concat_split.RULES + slices.RULES,
            "layout": layout.RULES, "conv": conv.RULES, "fusion": fusion.RULES}

__all__ = ["ALL", "FAMILIES"]
