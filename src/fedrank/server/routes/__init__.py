"""The API's endpoints, one module per concern: the model (:mod:`.model`), updates
(:mod:`.ingest`), check-in (:mod:`.checkin`), secure aggregation (:mod:`.secagg`), the
operator's actions (:mod:`.admin`) and what an operator watches (:mod:`.observability`).
:func:`fedrank.server.app.create_app` routes the paths to them."""
