"""Every rule passes both checks; every axiom holds by symbolic execution; and the
checks have teeth: a wrong axiom, a wrong rule and a missing axiom are all caught."""
import pytest

from hlo_opt import rules
from hlo_opt.__main__ import main
from hlo_opt.rules import Pat, Rule, tensors, verify
from hlo_opt.rules.axioms import axiom
from hlo_opt.rules.library import concat_split

x, y, w, a, b = tensors("x y w a b")
SOUND = [ax for ax in rules.AXIOMS]


@pytest.mark.parametrize("name", [ax.name for ax in rules.AXIOMS])
def test_axiom_holds_on_small_tensors(name):
    outcome = verify.validate(rules.AXIOMS[name])
    assert outcome.ok, outcome.detail


@pytest.mark.parametrize("name", [r.name for r in rules.ALL])
def test_rule_is_numerically_right_and_proven(name):
    rule = rules.ALL[name]
    numeric = verify.numeric(rule)
    assert numeric.ok, numeric.detail
    formal = verify.formal(rule, SOUND)
    assert formal.ok, formal.detail
    assert formal.axioms and formal.axioms <= {ax.name for ax in rules.AXIOMS}


def _conv(x, w):
    from jax import lax
    return lax.conv_general_dilated(x, w, (1, 1), "VALID")


def test_a_wrong_axiom_is_rejected_by_symbolic_execution():
    """'relu of a conv is linear in the kernel' -- false, and must not be believed."""
    c = Pat("relu", Pat("conv_general_dilated", x, Pat("add", a, b)))
    inner = c.inputs[0]
    wrong = axiom("relu-conv-linear", c,
                  Pat("add", Pat("relu", Pat("conv_general_dilated", x, a, like=inner)),
                      Pat("relu", Pat("conv_general_dilated", x, b, like=inner))),
                  lambda n: (lambda x, a, b: __import__("jax").nn.relu(_conv(x, a + b)),
                             [(1, 1, 2, 2), (1, 1, 1, 1), (1, 1, 1, 1)]), cases=1)
    outcome = verify.validate(wrong)
    assert not outcome.ok and "counterexample" in outcome.detail


def test_a_wrong_rule_fails_both_checks():
    tanh_add = Rule("tanh-of-sum", "algebra", Pat("tanh", Pat("add", x, y)),
                    Pat("add", Pat("tanh", x), Pat("tanh", y)),
                    example=lambda n: (lambda x, y: __import__("jax").numpy.tanh(x + y),
                                       [(n + 2,)] * 2))
    assert not verify.numeric(tanh_add).ok
    assert not verify.formal(tanh_add, SOUND).ok


def test_a_proof_needs_its_axioms():
    rule = concat_split.RULES["merge-dots-shared-lhs"]
    assert verify.formal(rule, SOUND).ok
    without = [ax for ax in SOUND if ax.name != "ax-dot-concat-rhs"]
    outcome = verify.formal(rule, without)
    assert not outcome.ok and "not proven" in outcome.detail


@pytest.mark.slow        # proves every rule again (2 minutes), as the test above does
def test_cli_verify_prints_the_axiom_table_and_the_totals(capsys):
    assert main(["rules", "verify"]) == 0
    out = capsys.readouterr().out
    assert "ax-split-def" in out and "rules using it" in out
    assert f"{len(rules.ALL)}/{len(rules.ALL)} rules verified" in out
    main(["rules", "list"])
    listed = capsys.readouterr().out
    assert "x@a, x@b -> split(x@concat(a,b))" in listed and "FAILED" not in listed


def test_max_pooling_is_checked_symbolically_and_a_wrong_window_is_caught():
    """The window axiom holds with max pooling on z3 terms; with the window left in
    the transposed tensor's axis order (not renamed) it must fail."""
    from hlo_opt.rules import Fn
    from hlo_opt.rules.library import layout as L
    from jax import lax
    import jax.numpy as jnp
    right = rules.AXIOMS["ax-transpose-window"]
    assert verify.validate(right).ok
    src = L.RULES["transpose-through-window"].src[0]
    unrenamed = L.t(Pat(L.POOL, L.x, **{k: Fn(lambda m, k=k: m.params(src)[k])
                                      for k in L.WINDOW_PARAMS}), L.perm)
    wrong = axiom("transpose-window-unrenamed", src, unrenamed,
                  lambda n: (lambda x: lax.reduce_window(lax.transpose(x, (0, 2, 3, 1)),
                                                         -jnp.inf, lax.max, (1, 1, 2, 1),
                                                         (1, 1, 1, 1), "VALID"),
                             [(1, 3, 2, 3)]), cases=1)
    outcome = verify.validate(wrong)
    assert not outcome.ok, outcome.detail
