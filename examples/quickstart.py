"""The smallest hlo_opt example: optimise a two-layer MLP and compare with jax.jit."""
import jax
import jax.numpy as jnp
import numpy as np

import hlo_opt


@hlo_opt.optimize
def mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jax.nn.softmax(h @ params["w2"] + params["b2"])


def main():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    params = {"w1": jax.random.normal(k1, (256, 512)) * 0.05, "b1": jnp.zeros(512),
              "w2": jax.random.normal(k2, (512, 10)) * 0.05, "b2": jnp.zeros(10)}
    x = jax.random.normal(k3, (32, 256))
    ours = mlp(params, x)
    reference = jax.jit(mlp.__wrapped__)(params, x)
    print(mlp.explain(params, x).summary())
    print(f"max abs difference vs jax.jit: {float(np.max(np.abs(ours - reference))):.3g}")
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-6)   # rewrites may reassociate


if __name__ == "__main__":
    main()
