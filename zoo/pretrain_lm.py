"""``python -m zoo.pretrain_lm``: the small pretrained model of a prompt task (:mod:`zoo.paper.llm.pretrain`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.llm.pretrain`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.llm.pretrain")
