"""The search's decisions, one module per idea, in the order of docs/search.md.

- :mod:`autotune.search.noise`: the noise model and the search's decision constants. The flags'
  defaults are in :mod:`autotune.settings`.
- :mod:`autotune.search.sampling`: when a point's windows may stop, and which were warm-up.
- :mod:`autotune.search.level_search`: the search for a config's goodput, in a closed or open loop.
- :mod:`autotune.search.ranking`: how trials compare, which is best, and which are the finalists.
- :mod:`autotune.search.racing`: the finalists' race. It is a state with one method per transition.
- :mod:`autotune.search.walk`: the seeds, the walk from the best trial, and when the walk stops.

All of it is pure. It reads what was measured and decides. Serving and measuring happen elsewhere.
"""
