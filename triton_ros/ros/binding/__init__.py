"""A binding: input topics -> one model input -> one output topic per input topic. The runtime
(:mod:`.binding`), its plan against the serving model (:mod:`.plan`), each input topic's flow
control (:mod:`.source`) and topic patterns (:mod:`.topic_discovery`)."""
