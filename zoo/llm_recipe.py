"""``python -m zoo.llm_recipe``: the LLM RLVR comparison with TRL (:mod:`zoo.paper.llm.recipe`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.llm.recipe`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.llm.recipe")
