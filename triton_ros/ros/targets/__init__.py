"""The model a binding feeds: the interface (:mod:`.spec`), the embedded core's model
(:mod:`.local`) and a model on remote KServe v2 endpoints (:mod:`.remote`)."""
