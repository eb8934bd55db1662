"""Sports and Outdoors, leave-one-out: `beauty_single` (one item-level retriever with a moving
average of its parameters, Beauty's settings) on Sports.

Not yet run as a preset. Without the moving average, test R@5 / N@5 / R@10 / N@10 2.71 / 1.79 /
4.22 / 2.27 as the mean of `sports_item_cf`'s two members of pipeline seed 0 ranked alone (RPG:
3.14 / 2.16 / 4.63 / 2.63), Intel Xeon, 35-36 minutes of training beside another;
docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset sports --config sports_single --workdir runs/sports_single`.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(sports.get_config()), "sports_single")
