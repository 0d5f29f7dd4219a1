"""Tools around the node, not parts of it: the ROS demo (:mod:`.demo`, what scripts/run.sh runs),
synthetic multi-robot cameras with ground truth (:mod:`.synthetic_cameras`, the
``synthetic_cameras`` console script) and detection scoring against it
(:mod:`.detection_metrics`)."""
