"""TPO on Token Reversal (terminal reward) in one file, CleanRL style.

Target Policy Optimization (TPO), one iteration:

1. Draw B prompts x; sample K completions y_1..y_K per prompt from the current policy
   (the rollout snapshot pi_old) and step them through the env. With the terminal reward the
   env pays 1.0 at the last token iff the whole reversal is exact, so a completion's score
   s_i is the sum of its step rewards.
2. Per group (prompt): u_i = (s_i - mean(s)) / std(s) with the population std (divide by K).
   A zero-variance group (all K right or all K wrong) has u = 0 and is skipped.
3. l_i = log pi(y_i | x), the sum of the completion's token log-probs. The target over the K
   completions is q = softmax(l_old + u / eta) (= p_old_i exp(u_i/eta) / normaliser), frozen.
4. Loss: L = -sum_i q_i log softmax(l)_i, averaged over groups; dL/dl_i = p_i - q_i, so the
   update stops by itself once the group policy p matches q. Run a few Adam epochs on the
   same batch: q stays fixed, l is recomputed under the current parameters.

Only gymnasium, numpy, torch and the `tpo_gym` envs are used. Run:
    python examples/tpo_minimal.py --length 4 --vocab-size 2
"""

import argparse
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

import tpo_gym  # noqa: F401  (registers the TokenReversal-* envs)


@dataclass
class Args:
    seed: int = 1
    length: int = 4  # H: prompt and answer length
    vocab_size: int = 2  # V
    iterations: int = 100
    prompts: int = 32  # B prompts per iteration
    k: int = 8  # K completions per prompt
    epochs: int = 2  # gradient epochs per batch
    eta: float = 1.0  # TPO temperature
    lr: float = 1e-3
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    eval_prompts: int = 512
    log_every: int = 10


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in vars(Args()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return Args(**vars(parser.parse_args(argv)))


class Policy(nn.Module):
    """A small causal transformer over [prompt, answer so far]; answer token t is read at H-1+t."""

    def __init__(self, a: Args):
        super().__init__()
        self.tok = nn.Embedding(a.vocab_size + 1, a.d_model)  # + the env's PAD id (= V)
        self.pos = nn.Embedding(2 * a.length, a.d_model)
        layer = nn.TransformerEncoderLayer(
            a.d_model, a.heads, 4 * a.d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
        self.head = nn.Linear(a.d_model, a.vocab_size)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:  # [N, L] tokens -> [N, L, V] logits
        n = seq.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        h = self.tok(seq) + self.pos(torch.arange(n))
        return self.head(self.body(h, mask=mask, is_causal=True))


def sequence_logp(policy: Policy, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """l = sum_t log pi(a_t | x, a_<t), one teacher-forced pass: [N, H], [N, H] -> [N]."""
    h = prompts.shape[1]
    logits = policy(torch.cat([prompts, answers[:, :-1]], dim=1))[:, h - 1 :]
    return torch.log_softmax(logits, -1).gather(-1, answers[..., None]).squeeze(-1).sum(-1)


@torch.no_grad()
def rollout(policy: Policy, env, obs: np.ndarray, h: int, greedy: bool = False):
    """Write H tokens in every sub-env. For clarity the whole prefix is re-run every step
    (no KV cache): H forward passes over sequences of length H..2H-1."""
    rewards = np.zeros(env.num_envs)
    for t in range(h):
        logits = policy(torch.as_tensor(obs[:, : h + t]))[:, -1]
        if greedy:
            actions = logits.argmax(-1)
        else:
            actions = torch.distributions.Categorical(logits=logits).sample()
        obs, reward, terminated, truncated, info = env.step(actions.numpy())
        rewards += reward  # terminal reward: 0 until the last token, then exact match
    final = np.stack(info["final_obs"])  # the finished episodes [N, 2H] (obs autoreset)
    return obs, final[:, :h], final[:, h:], rewards


def tpo_loss(logp, logp_old, u, valid, eta):
    """-mean_groups sum_i q_i log softmax(l)_i with q = softmax(l_old + u / eta) (no grad).
    Skipped groups add 0; the mean divides by all G groups (as tpo_agents does)."""
    q = torch.softmax(logp_old + u / eta, dim=-1)
    per_group = -(q * torch.log_softmax(logp, dim=-1)).sum(-1)
    return (per_group * valid).sum() / len(per_group)


def main(argv=None) -> dict:
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    h, bk = a.length, a.prompts * a.k
    make = dict(length=h, vocab_size=a.vocab_size, vectorization_mode="vector_entry_point")
    # group_size=K: every block of K consecutive sub-envs shares one prompt (one TPO group)
    env = gym.make_vec("TokenReversal-terminal-v0", num_envs=bk, group_size=a.k, **make)
    eval_env = gym.make_vec("TokenReversal-terminal-v0", num_envs=a.eval_prompts, **make)
    policy = Policy(a)
    opt = torch.optim.Adam(policy.parameters(), lr=a.lr)
    obs, _ = env.reset(seed=a.seed)
    start = time.time()
    for it in range(1, a.iterations + 1):
        obs, x, y, r = rollout(policy, env, obs, h)
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        s = torch.as_tensor(r, dtype=torch.float32).view(a.prompts, a.k)
        std = s.std(-1, unbiased=False, keepdim=True)  # population std
        valid = std > 1e-6  # zero-variance groups: u = 0, skipped
        u = torch.where(valid, (s - s.mean(-1, keepdim=True)) / std.clamp_min(1e-6), 0.0)
        valid = valid.squeeze(-1).float()
        with torch.no_grad():
            logp_old = sequence_logp(policy, x, y).view(a.prompts, a.k)
        for _ in range(a.epochs):
            logp = sequence_logp(policy, x, y).view(a.prompts, a.k)
            loss = tpo_loss(logp, logp_old, u, valid, a.eta)
            opt.zero_grad()
            loss.backward()
            opt.step()
        train_em = float((r == 1.0).mean())  # sampled batch before the update
        if it % a.log_every == 0 or it == a.iterations:
            print(f"iter {it:4d}  mean reward {r.mean():.3f}  exact-match {train_em:.3f}  "
                  f"groups used {valid.mean():.2f}  loss {loss.item():.4f}  "
                  f"time {time.time() - start:.1f}s", flush=True)
    eval_obs, _ = eval_env.reset(seed=a.seed + 10**6)  # fresh prompts, greedy decoding
    _, _, _, eval_r = rollout(policy, eval_env, eval_obs, h, greedy=True)
    greedy_em = float((eval_r == 1.0).mean())
    print(f"final exact-match {greedy_em:.2f} (greedy, {a.eval_prompts} fresh prompts); "
          f"last sampled batch {train_em:.2f}")
    env.close()
    eval_env.close()
    return {"exact_match": greedy_em, "train_exact_match": train_em,
            "mean_reward": float(r.mean()), "iterations": a.iterations}


if __name__ == "__main__":
    main()
