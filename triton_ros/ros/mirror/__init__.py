"""Results of the node's bindings mirrored to Kafka, a fleet's analytics sink: each result, as
JSON (:mod:`.message_json`), produced to a topic keyed by robot and camera
(:mod:`.kafka_mirror`), its drops and deliveries on /diagnostics (:mod:`.diagnostics`) and the
metrics endpoint (:mod:`.mirror_metrics`)."""
