"""MLflow: the tracking store and run params (:mod:`.store`), per-item traces (:mod:`.traces`), their spans,
assessments and masking, dataset inputs, and the offline UI (:mod:`.ui`). MLflow is imported only here, lazily."""
