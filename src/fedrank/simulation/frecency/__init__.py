"""The simulated users of the federated frecency study (Mozilla paper, Sec. 4 and 6.1-6.3).

* :mod:`~fedrank.simulation.frecency.world`: the users, their branches, history and clock;
  the searches they make and what the searches change (:class:`~fedrank.simulation.
  frecency.world.FrecencyWorld`);
* what users want (:mod:`~fedrank.simulation.frecency.intent`), the history Firefox keeps
  for them (:mod:`~fedrank.simulation.frecency.history_store`,
  :mod:`~fedrank.simulation.frecency.input_history`) and what they type, see and select
  (:mod:`~fedrank.simulation.frecency.urlbar`);
* the pages' frecency under a weight vector, kept between searches
  (:mod:`~fedrank.simulation.frecency.scoring`, :mod:`~fedrank.simulation.frecency.
  score_cache`);
* what the treatment clients hold and send (:mod:`~fedrank.simulation.frecency.messages`);
* how the simulation shares the cores (:mod:`~fedrank.simulation.frecency.pipeline`) and
  its compiled loops (:mod:`~fedrank.simulation.frecency.kernels`).
"""
