"""Sports and Outdoors, leave-one-out: `beauty_single` (one item-level retriever with a moving
average of its parameters, distilled from a teacher of its config; Beauty's settings) on Sports.

Test R@5 / N@5 / R@10 / N@10 2.76 / 1.77 / 4.33 / 2.27, the mean of pipeline seeds 0-2 (RPG: 3.14
/ 2.16 / 4.63 / 2.63), 48.5 minutes from an empty work directory alone on an AMD EPYC (training
loops 38), 52-64 on the Xeon's shared cores (loops 42-51); docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset sports --config sports_single --workdir runs/sports_single`."""

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(sports.get_config()), "sports_single")
