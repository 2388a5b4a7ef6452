"""``python -m zoo.llm_difficulty``: LLM RLVR along a difficulty dial (:mod:`zoo.paper.llm.difficulty`).

A command-line path that the docs and result files cite; importing it gives :mod:`zoo.paper.llm.difficulty`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.llm.difficulty")
