"""Sports and Outdoors, leave-one-out: `beauty_single` (one item-level retriever with a moving
average of its parameters, distilled from a teacher of its config; Beauty's settings) on Sports.

Test R@5 / N@5 / R@10 / N@10 2.72 / 1.75 / 4.30 / 2.26 over pipeline seeds 0 and 1 (RPG: 3.14 /
2.16 / 4.63 / 2.63), Intel Xeon, 52-64 minutes from an empty work directory on shared cores
(training loops 42-51); docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset sports --config sports_single --workdir runs/sports_single`."""

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(sports.get_config()), "sports_single")
