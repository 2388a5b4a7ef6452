"""Gymnasium environments for Target Policy Optimization.

Importing this package registers every environment id; it never imports torch.
"""

from tpo_gym.registration import register_all

register_all()

__all__ = ["register_all"]
