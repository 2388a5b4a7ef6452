"""The LLM side of the paper's reproduction.

* :mod:`zoo.paper.llm.tiny`: a tiny Llama and a character tokenizer, built offline;
* :mod:`zoo.paper.llm.pretrain`: small pretrained models (SFT to partial competence), cached;
* :mod:`zoo.paper.llm.study`: RLVR from such a model, our agents and the TRL trainers;
* :mod:`zoo.paper.llm.difficulty`: the same along a difficulty dial (string length);
* :mod:`zoo.paper.llm.recipe`: the same comparison on a real model folder;
* :mod:`zoo.paper.llm.trl_train`: TRL's ``trl grpo`` script with TPO (``python -m zoo.trl_train``).
"""
