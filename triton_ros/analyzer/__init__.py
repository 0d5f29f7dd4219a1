"""``triton-ros-analyzer``: Triton model_analyzer's answer for a model of a repository.

``perf_analyzer`` measures one configuration; the analyzer sweeps configurations of a model and
says which one to use. It follows model_analyzer's vocabulary and output layout:

- ``profile`` (:mod:`.profiler`): writes each configuration (instance count and kind, max batch
  size, the dynamic batcher's delay and preferred sizes, ONNX Runtime's thread counts) into a
  scratch copy of the model (:mod:`.model_variant`, never the user's repository), starts the real
  ``triton-ros-server`` on it (:mod:`.triton_server`), sweeps client concurrency with the real
  ``perf_analyzer`` (:mod:`.perf_analyzer`) while the server's CPU and memory are sampled
  (:mod:`.server_monitor`), searches the space with model_analyzer's ``quick`` (hill climbing) or
  ``brute`` strategies (:mod:`.config_search`, :mod:`.search_space`), and writes the tables,
  latency-throughput and memory charts and an HTML summary (:mod:`.report`) and the best
  configuration under a latency budget or memory cap as a ready config.pbtxt
  (:mod:`.recommendation`).
- ``ros`` (:mod:`.ros_profiler`): how many cameras, at which rate, an ``inference_node`` serves
  within a per-frame latency budget, with the bundled ``synthetic_cameras`` and the node as
  processes, read through the node's ``~/status`` and ``~/get_model_statistics``.

The package reads configurations with :mod:`triton_ros.core.model_config`; nothing in the core,
the frontends or the ROS node imports it.
"""
