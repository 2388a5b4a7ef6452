"""From a ``zoo.paper.reproduce`` command line to an experiment's grid of jobs.

The options pick the methods (``--methods``, by canonical key or alias: see
:mod:`zoo.paper.token.methods`), the settings (``--settings``, ``--lengths``, ``--vocabs``,
``--length``), the seeds and episodes, the matching (``--match``) and the variant
(``--substrate``, ``--init``, ``--optimizer``, ``--learning-rate``), which names the jobs'
tags and the output files (:func:`variant_suffix`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from zoo.paper.token.experiments import Setting, TokenExperiment
from zoo.paper.token.jobs import Job
from zoo.paper.token.methods import METHOD_NAMES, is_single_sample, record_key, unknown_methods

# TransformerPolicy's ``init`` and ``substrate`` choices and defaults
# (tpo_agents.policies.transformer.INITS, DEFAULT_INIT, SUBSTRATES), named here so the
# command line parses without importing torch.
POLICY_INITS = ("torch", "haiku", "flax")
DEFAULT_POLICY_INIT = "haiku"
SUBSTRATES = ("ours", "paper")
DEFAULT_SUBSTRATE = "paper"
"""``zoo.paper.reproduce`` reproduces the paper, so it trains on the paper's substrate unless told."""


def _check_args(exp: TokenExperiment, args: argparse.Namespace) -> None:
    lengths, vocabs, length = (
        getattr(args, "lengths", None),
        getattr(args, "vocabs", None),
        getattr(args, "length", None),
    )
    if lengths and exp.name != "terminal":
        raise SystemExit(f"--lengths applies to 'terminal' only (use --length for {exp.name!r})")
    if length and exp.name == "terminal":
        raise SystemExit("'terminal' takes --lengths (several H), not --length")
    if vocabs and exp.name != "token-vocab":
        raise SystemExit(f"--vocabs applies to 'token-vocab' only, not {exp.name!r}")
    unknown = unknown_methods(getattr(args, "methods", None) or ())
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; known: {list(METHOD_NAMES)}")


def select_methods(exp: TokenExperiment, names: Sequence[str] | None) -> list[str]:
    """The stored names of the requested methods (all of ``exp``'s when ``names`` is empty),
    in the order asked, each once: an alias and its canonical key give the same jobs."""
    if not names:
        return list(exp.methods)
    return list(dict.fromkeys(record_key(name, exp.methods) for name in names))


def select_settings(
    exp: TokenExperiment, settings: list[Setting], tags: Sequence[str] | None
) -> list[Setting]:
    """The settings whose tag is in ``tags`` (all when ``tags`` is empty), in table order."""
    if not tags:
        return settings
    known = [s.tag for s in settings]
    unknown = [t for t in tags if t not in known]
    if unknown:
        raise SystemExit(f"unknown setting(s) {unknown} for {exp.name!r}; known tags: {known}")
    return [s for s in settings if s.tag in tags]


def substrate_of(args: argparse.Namespace) -> str:
    substrate = getattr(args, "substrate", None) or DEFAULT_SUBSTRATE
    if substrate not in SUBSTRATES:
        raise SystemExit(f"--substrate must be one of {SUBSTRATES}; got {substrate!r}")
    if substrate == "paper" and getattr(args, "init", None) is not None:
        raise SystemExit("--init applies to --substrate ours (the paper substrate has flax's initialization)")
    return substrate


def init_of(args: argparse.Namespace) -> str:
    """The transformer's initialization a run uses (the paper substrate's is flax's)."""
    if substrate_of(args) == "paper":
        return "flax (the artifact's)"
    return getattr(args, "init", None) or DEFAULT_POLICY_INIT


def policy_kwargs_of(args: argparse.Namespace) -> dict:
    """TransformerPolicy keywords of a run: always named, so that every cached job and
    result file records the substrate (and, on ours, the initialization) that made it."""
    substrate = substrate_of(args)
    if substrate == "paper":
        kwargs = {"substrate": "paper"}
    else:
        kwargs = {"substrate": "ours", "init": init_of(args)}
    optimizer = getattr(args, "optimizer", None) or "substrate"
    if optimizer != "substrate":
        kwargs["optimizer"] = optimizer
    return kwargs


def variant_suffix(args: argparse.Namespace) -> str:
    """Suffix naming a run's substrate and its departures from the paper's defaults
    (``-paper``, ``-ours-initflax``, ``-paper-lr0.0015``), for its setting tags and its
    output files."""
    suffix = f"-{substrate_of(args)}"
    if (getattr(args, "optimizer", None) or "substrate") != "substrate":
        suffix += f"-{args.optimizer}"
    if getattr(args, "learning_rate", None) is not None:
        suffix += f"-lr{args.learning_rate:g}"
    if getattr(args, "init", None) is not None:
        suffix += f"-init{args.init}"
    return suffix


def build_jobs(
    exp: TokenExperiment, args: argparse.Namespace
) -> tuple[list[str], list[Setting], list[Job]]:
    """The methods (stored names), settings and jobs of ``exp`` for the parsed command line."""
    _check_args(exp, args)
    methods = select_methods(exp, getattr(args, "methods", None))
    settings = select_settings(exp, exp.settings(args), getattr(args, "settings", None))
    match = getattr(args, "match", None) or "prompts"
    learning_rate = getattr(args, "learning_rate", None)
    policy_kwargs = policy_kwargs_of(args)
    jobs = []
    for method in methods:
        for s in settings:
            agent = dict(s.agent)
            tag = s.tag + variant_suffix(args)
            if learning_rate is not None:
                agent["learning_rate"] = learning_rate
            agent["policy_kwargs"] = {**agent.get("policy_kwargs", {}), **policy_kwargs}
            if match == "interactions" and is_single_sample(method):
                agent["interaction_matched"] = True
                tag += "-im"
            for seed in range(args.seeds):
                jobs.append(
                    Job(exp.name, method, s.label, tag, seed, args.steps, dict(s.env), agent)
                )
    return methods, settings, jobs
