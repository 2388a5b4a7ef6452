"""``python -m zoo.trl_train``: TPO or GRPO through TRL from the command line, like TRL's
``trl grpo`` script (:mod:`zoo.paper.llm.trl_train`).

A command-line path that the docs cite; importing it gives :mod:`zoo.paper.llm.trl_train`.
"""

from zoo.cli import alias_module

alias_module(__name__, "zoo.paper.llm.trl_train")
