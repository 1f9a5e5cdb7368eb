"""What hlo_opt did to one model: the report's table, the optimised source, and a picture.

    python examples/explain.py                          # SqueezeNet (small), NCHW
    python examples/explain.py --model=resnet50 --out=/tmp/explain

Writes <out>/<model>.png (before and after side by side, nodes the rewrites made in
orange), <out>/<model>.dot (Graphviz text from `Report.to_dot()`) and <out>/<model>.py
(`Report.source`), and prints `Report.summary()`. The picture is drawn by Graphviz when
its `dot` program is installed, else by networkx and matplotlib.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import jax
import matplotlib
import networkx as nx
from absl import app, flags

import hlo_opt
import models

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the file backend

flags.DEFINE_string("model", "squeezenet", "Zoo model to explain.")
flags.DEFINE_bool("small", True, "The model's small configuration (a readable picture).")
flags.DEFINE_string("layout", "NCHW", "Layout of the CNNs.")
flags.DEFINE_string("cost", "measured", "Cost model: measured or analytic.")
flags.DEFINE_float("time_limit", 10.0, "Search seconds.")
flags.DEFINE_string("out", "results", "Directory for the picture, the dot text and the source.")
FLAGS = flags.FLAGS


def _digraph(graph) -> nx.DiGraph:
    g = nx.DiGraph()
    for i, node in enumerate(graph.nodes):
        g.add_node(node, layer=0, label=node.op.replace("_general", "").replace("_dilated", ""))
    for node in graph.nodes:
        for parent in node.parents():
            g.add_edge(parent, node)
    for node in nx.topological_sort(g):
        g.nodes[node]["layer"] = max((g.nodes[p]["layer"] + 1 for p in g.predecessors(node)),
                                     default=0)
    return g


def draw_with_networkx(report, path: str) -> None:
    before = {n.digest for n in report.original.nodes}
    fig, axes = plt.subplots(1, 2, figsize=(16, 12))
    for ax, title, graph in ((axes[0], "before", report.original),
                             (axes[1], "after", report.optimized)):
        g = _digraph(graph)
        pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal", scale=-1)
        colors = ["#ffb347" if title == "after" and n.digest not in before else "#cfe2f3"
                  for n in g.nodes]
        nx.draw_networkx(g, pos, ax=ax, node_color=colors, node_size=260, font_size=6,
                         labels=nx.get_node_attributes(g, "label"), arrowsize=6, width=0.5)
        ax.set_title(f"{title}: {len(graph.nodes)} nodes")
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv):
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    layout = FLAGS.layout if FLAGS.model in models.CNNS else None
    fn, params, inputs = models.build(FLAGS.model, layout=layout, small=FLAGS.small)
    ours = hlo_opt.jit(fn, frozen_argnums=(0,), cost=FLAGS.cost, time_limit=FLAGS.time_limit)
    report = ours.explain(params, *inputs)
    jax.block_until_ready(ours(params, *inputs))
    os.makedirs(FLAGS.out, exist_ok=True)
    stem = os.path.join(FLAGS.out, FLAGS.model)
    with open(stem + ".dot", "w") as f:
        f.write(report.to_dot())
    with open(stem + ".py", "w") as f:
        f.write(report.source or "")
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tpng", stem + ".dot", "-o", stem + ".png"], check=True)
    else:
        draw_with_networkx(report, stem + ".png")
    print(report.summary())
    print(f"wrote {stem}.png, {stem}.dot, {stem}.py")


if __name__ == "__main__":
    app.run(main)
