"""examples/in_program.py's reading of compiled HLO: which library fusions a program
has, their shapes, parameters and contents."""
import jax
import jax.numpy as jnp
import pytest
from jax import lax

from in_program import library_fusions

HLO = """HloModule m

%fused_computation.3 (param_0: f32[1,8,8,4], param_1: f32[1,1,4,4]) -> f32[1,8,8,4] {
  %c.1 = f32[1,8,8,4]{3,2,1,0} convolution(%param_0, %param_1), dim_labels=b01f_01io->b01f
  %c.2 = f32[1,8,8,4]{3,2,1,0} convolution(%c.1, %param_1), dim_labels=b01f_01io->b01f
  ROOT %m = f32[1,8,8,4]{3,2,1,0} maximum(%c.2, %c.1)
}

ENTRY %main (args_0_.1: f32[1,8,8,4], args_1_.1: f32[1,1,4,4]) -> f32[1,8,8,4] {
  %args_0_.1 = f32[1,8,8,4]{3,2,1,0} parameter(0), metadata={op_name="args[0]"}
  %args_1_.1 = f32[1,1,4,4]{3,2,1,0} parameter(1), metadata={op_name="args[1]"}
  %loop_fusion = f32[1,8,8,4]{3,2,1,0} fusion(%args_0_.1), kind=kLoop, calls=%other
  ROOT %ynn_fusion.7 = f32[1,8,8,4]{3,2,1,0} fusion(%loop_fusion, %args_1_.1), kind=kCustom, calls=%fused_computation.3, backend_config={}
}
"""


def test_reads_a_library_fusion_its_parameters_and_its_convs():
    assert library_fusions(HLO) == {"ynn_fusion.7": {
        "shape": (1, 8, 8, 4), "parameters": [(1, 1, 4, 4)], "convs": 2, "dots": 0}}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA CPU's library fusions")
def test_finds_the_conv_of_a_compiled_program():
    def f(x, w):
        return jnp.maximum(lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), 0)
    x, w = jnp.ones((1, 16, 16, 64)), jnp.ones((3, 3, 64, 32))
    found = library_fusions(jax.jit(f).lower(x, w).compile().as_text())
    if not found:
        pytest.skip("this XLA runs the conv outside a library fusion")
    assert [(v["shape"], v["parameters"], v["convs"]) for v in found.values()] == \
        [((1, 16, 16, 32), [(1, 16, 16, 64), (3, 3, 64, 32)], 1)]
