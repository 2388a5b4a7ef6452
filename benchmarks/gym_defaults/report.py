"""The gym-defaults benchmark's report: per-env summaries, the PPO-zoo comparison, and
the result written as ``gym_defaults.json``, ``.png`` and ``.md``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.gym_defaults.config import (
    ENVS,
    MATCH_RULE,
    METHOD_LABELS,
    NAME,
    NO_ZOO_ENTRY,
    method_hyperparameters,
)
from benchmarks.harness import LAST_EVALS, Run, summarize_method

# --------------------------------------------------------------------------- summaries


def summarize_env(env_name: str, runs: list[Run], records: Mapping[str, dict], methods: list[str]) -> dict:
    """Per method: ``benchmarks.harness.summarize_method`` over the seeds that finished, plus
    the resolved settings and the failed seeds; and which methods match PPO-zoo."""
    env = ENVS[env_name]
    steps = runs[0].grid
    summaries: dict[str, dict] = {}
    for method in methods:
        mine = [r for r in runs if r.method == method and r.name in records]
        done = [r for r in mine if "failed" not in records[r.name]]
        failures = [{"seed": r.seed, "error": records[r.name]["failed"]} for r in mine if r not in done]
        hyper = method_hyperparameters(env_name, method)
        if done:
            summary = summarize_method(steps, [records[r.name] for r in done], [r.seed for r in done], env.threshold, hyper)
            summary["resolved"] = records[done[0].name].get("resolved", {})
        else:
            summary = {"settings": hyper, "seeds": [], "steps": steps}
        summary["failures"] = failures
        summaries[method] = summary
    return {
        "threshold": env.threshold,
        "timesteps": runs[0].timesteps,
        "default_timesteps": env.timesteps,
        "eval_every": runs[0].eval_every,
        "note": env.note,
        "ppo_zoo": method_hyperparameters(env_name, "ppo_zoo")["source"],
        "methods": summaries,
        "matches_ppo_zoo": {m: matches_ppo_zoo(summaries, m) for m in methods if m != "ppo_zoo"},
    }


def matches_ppo_zoo(summaries: Mapping[str, dict], method: str) -> bool | None:
    """``MATCH_RULE`` for ``method`` (None when either side has no finished seed)."""
    ours, ppo = summaries.get(method, {}), summaries.get("ppo_zoo", {})
    if not ours.get("seeds") or not ppo.get("seeds"):
        return None
    return bool(ours["last_evals_mean_return"] >= ppo["last_evals_mean_return"] - ppo["last_evals_se"])


def match_lines(envs: Mapping[str, dict]) -> dict[str, dict]:
    """Per method compared: on how many envs it matches PPO-zoo, and the sentence."""
    lines = {}
    for method in ("tpo", "grpo"):
        verdicts = {e: v["matches_ppo_zoo"][method] for e, v in envs.items() if v["matches_ppo_zoo"].get(method) is not None}
        if not any(method in v["matches_ppo_zoo"] for v in envs.values()):
            continue
        n = sum(verdicts.values())
        label = METHOD_LABELS[method].split()[0]
        lines[method] = {
            "matches": n,
            "compared": len(verdicts),
            "envs": [e for e, ok in verdicts.items() if ok],
            "line": f"{label} with defaults matches PPO-zoo on {n} of {len(verdicts)} envs"
            if verdicts
            else f"{label} with defaults: no env to compare with PPO-zoo (both need finished runs)",
        }
    return lines


def _row(env_name: str, env: dict, key: str, m: dict, n_seeds: int) -> str:
    label = METHOD_LABELS[key]
    if 0 < len(m["seeds"]) < n_seeds:  # a row still running: its figures are over fewer seeds
        label += f" ({len(m['seeds'])} of {n_seeds} seeds)"
    if not m["seeds"]:
        errors = "; ".join(f"seed {f['seed']}: {f['error']}" for f in m["failures"])
        errors = errors.replace("|", "/").replace("\n", " ")  # keep the table row one row
        text = f"all runs failed ({errors})" if errors else "no run in the cache"
        return f"| {env_name} | {label} | {env['timesteps']} | {text} | | | | | | | | |"
    reached = sum(s is not None for s in m["steps_to_threshold_per_seed"])
    to_th = m["steps_to_threshold"]
    verdict = env["matches_ppo_zoo"].get(key)
    failed = f" ({len(m['failures'])} failed)" if m["failures"] else ""
    cells = [
        env_name,
        label,
        str(env["timesteps"]),
        f"{m['final_mean_return']:.2f} +- {m['final_se']:.2f}",
        f"{m['last_evals_mean_return']:.2f} +- {m['last_evals_se']:.2f}",
        _worst_seed(m),
        f"{'-' if to_th is None else to_th} (>= {env['threshold']:g})",
        f"{reached}/{len(m['seeds'])}{failed}",
        f"{np.mean(m['env_steps_total']):.0f}",
        f"{np.mean(m['seconds']):.0f}",
        f"{np.mean(np.array(m['env_steps_total']) / np.array(m['seconds'])):.0f}",
        "" if verdict is None else ("yes" if verdict else "no"),
    ]
    return "| " + " | ".join(cells) + " |"


TABLE_HEAD = (
    "| env | method | env steps | final return (mean +- s.e.) | "
    f"mean of last {LAST_EVALS} evals (+- s.e.) | worst seed, mean of its last {LAST_EVALS} | "
    "steps to threshold (seed mean) | "
    "seeds reaching threshold | env interactions per run (all kinds) | wall s per run | "
    "env steps per s | matches PPO-zoo |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _worst_seed(m: dict) -> str:
    """The seed whose mean of the last evaluations is lowest, and that mean (records made
    before the per-seed figures were kept: computed from the curves)."""
    per_seed = m.get("last_evals_per_seed") or [float(np.mean(r[-m["last_evals"]:])) for r in m["returns"]]
    i = int(np.argmin(per_seed))
    return f"{per_seed[i]:.2f} (seed {m['seeds'][i]})"


def _more_episodes(cfg: dict) -> str:
    """Where an env is evaluated on more episodes than the rest (its ``min_eval_episodes``)."""
    more = {e: n for e, n in cfg.get("n_eval_episodes_per_env", {}).items() if n != cfg["n_eval_episodes"]}
    return "".join(f" ({n} on {e})" for e, n in more.items())


def protocol(cfg: dict) -> str:
    """The page's opening paragraph: what each method is and how it was measured."""
    return (
        f"Every method gets the same budget of env interactions per env ({cfg['timesteps_scale']:g} "
        + ("x rl-zoo3's own `n_timesteps` where it tuned PPO for longer than the table's budget, "
           "else the table's" if cfg.get("budget") == "zoo" else "x the env's default")
        + "), counting every kind: steps of the training env and the steps of "
        "state copies that `branch` groups play (`env_steps_total`); "
        f"{cfg['n_seeds']} seeds; the greedy policy is evaluated on "
        f"{cfg['n_eval_episodes']} episodes{_more_episodes(cfg)} of a separately seeded eval env every "
        f"{cfg['eval_every_fraction']:g} of the budget. TPO and GRPO: `TPO(\"MlpPolicy\", env, seed=s)`, "
        "no other argument. PPO-zoo: SB3 PPO with rl-zoo3's hyperparameters for the env "
        f"(rl-zoo3 {cfg['rl_zoo3_version']}); its `n_timesteps` is dropped (every method gets this "
        "budget, `lin_` schedules anneal over it) and `VecNormalize` statistics are shared with "
        "the eval env, frozen."
    )


def budget_remark(timesteps: int, hyperparameters: Mapping[str, Any]) -> str:
    """Where the benchmark's budget is below the ``n_timesteps`` rl-zoo3 tuned the entry for,
    a clause saying so (PPO-zoo is then read before the end of the run it was tuned for);
    otherwise ''."""
    tuned = (hyperparameters.get("dropped") or {}).get("n_timesteps")
    if tuned is None or timesteps >= float(tuned):
        return ""
    return (
        f"; the budget here, {timesteps:,} env steps, is {timesteps / float(tuned):.3g} x the "
        f"n_timesteps rl-zoo3 tuned this entry for ({float(tuned):,.0f})"
    )


def markdown(result: dict) -> str:
    """The summary page: protocol, table, match lines, PPO-zoo settings, skipped envs."""
    title = "# Gym defaults: TPO and GRPO with default hyperparameters vs PPO with rl-zoo3's tuned ones"
    cfg = result["config"]
    lines = [title, "", protocol(cfg), "", TABLE_HEAD]
    for env_name, env in result["envs"].items():
        lines += [_row(env_name, env, key, m, cfg["n_seeds"]) for key, m in env["methods"].items()]
    lines += ["", f"Matches PPO-zoo: {MATCH_RULE}.", ""]
    lines += [f"**{s['line']}**" + (f" ({', '.join(s['envs'])})." if s["envs"] else ".") for s in result["summary"].values()]
    lines += ["", "## PPO-zoo hyperparameters per env", ""]
    for env_name in result["envs"]:
        hp = cfg["hyperparameters"].get(env_name, {}).get("ppo_zoo")
        if hp is None:
            continue
        if hp["zoo_entry"] is None:
            lines.append(f"- {env_name}: ppo_zoo: {NO_ZOO_ENTRY}.")
            continue
        norm = f", VecNormalize({json.dumps(hp['normalize_kwargs'])})" if hp["normalize"] else ""
        lines.append(
            f"- {env_name}: {hp['source']}: n_envs {hp['n_envs']}{norm}, PPO `{json.dumps(hp['ppo_kwargs'])}`; "
            f"dropped `{json.dumps(hp['dropped'])}`{budget_remark(result['envs'][env_name]['timesteps'], hp)}."
        )
    if result["skipped"]:
        lines += ["", "## Skipped envs", ""]
        lines += [f"- {e}: {why}" for e, why in result["skipped"].items()]
    if result["failures"]:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {f['id']}: {f['error']}" for f in result["failures"]]
    if result["missing"]:
        lines += ["", f"## Not in the cache ({len(result['missing'])} runs)", "",
                  "(Runs cached before every env interaction was counted, `branch` runs whose budget "
                  "left out the steps of state copies, and TPO or GRPO runs made under defaults that "
                  "have changed since are listed here too: a rerun trains them again.)", ""]
        lines += [f"- {name}" for name in result["missing"]]
    where = " (report from the cache only)" if cfg["cached_only"] else ""
    lines.append(
        "\nAll returns come from greedy (deterministic) evaluation. Steps to threshold: the first "
        "evaluation at which the seed-mean return is at or above the env's threshold; at step 0 "
        "the policy is untrained and may already score high by chance.\n\n"
        f"Total wall time: {result['total_seconds']:.0f} s, {cfg['workers']} worker(s){where}; "
        f"compute time (sum over runs): {result['compute_seconds']:.0f} s."
    )
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, out_dir: Path) -> dict[str, Path]:
    """``gym_defaults.json``, ``.png`` and ``.md`` in ``out_dir`` (``gym_defaults-zoo-budget.*``
    with ``--budget zoo``), each written atomically."""
    name = NAME if result["config"].get("budget", "table") == "table" else f"{NAME}-zoo-budget"
    return harness.write_outputs(result, out_dir, name, markdown(result), METHOD_LABELS)
