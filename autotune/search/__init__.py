"""The search's decisions, one module per idea, in the order of docs/search.md.

- :mod:`autotune.search.noise`: the noise model, and the search's decision constants (the flags'
  defaults are :mod:`autotune.settings`').
- :mod:`autotune.search.sampling`: a point's sample and its stop rule.
- :mod:`autotune.search.level_search`: a config's goodput, closed and open loop.
- :mod:`autotune.search.ranking`: how trials compare, the best and the finalists.
- :mod:`autotune.search.racing`: the finalists' race, a state with a method per transition.
- :mod:`autotune.search.walk`: the seeds, the walk from the best trial, and its stop.

All of it is pure: it reads what was measured and decides; serving and measuring are elsewhere.
"""
