"""The paper's reproduction: every experiment by name -> JSON + PNG + markdown.

* :mod:`zoo.paper.reproduce`: the command line (``python -m zoo.reproduce NAME``);
* :mod:`zoo.paper.tabular`, :mod:`zoo.paper.mnist`: the exact bandit and MNIST studies;
* :mod:`zoo.paper.token`: the Token Reversal studies (Tables 1, 2, 3, 5);
* :mod:`zoo.paper.hero`: Table 3 at H = 10 beside the artifact's published curves;
* :mod:`zoo.paper.artifact_cells`: Table 3 cells run with the paper's own code, beside ours;
* :mod:`zoo.paper.report`: every result of a folder on one page;
* :mod:`zoo.paper.numbers`: the paper's published values, in one place;
* :mod:`zoo.paper.llm`: the LLM RLVR study, its TRL recipe and its small pretrained models.
"""
