# triton-ros-server in a container: the serving side of a fleet (docs/fleet.md). No ROS inside:
# robots run inference_node with `server_urls` pointing here.
#
#   docker build -t triton-ros-server:0.1.0 .
#   docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 -v $PWD/model_repository:/models \
#       triton-ros-server:0.1.0
#
# Not built on this project's machines (no container engine); its steps are what
# test/test_fleet_deploy.py checks in a plain virtual environment.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
WORKDIR /opt/triton_ros

# Only the server's pins from requirements.txt (the ROS 2 wheels and test tools stay out).
COPY requirements.txt requirements.txt
RUN grep -E '^(tritonclient(\[[a-z,]+\])?|geventhttpclient|gevent|greenlet|aiohttp|uvloop|grpcio|protobuf|prometheus-client|nvidia-ml-py|onnxruntime|onnx|numpy|PyYAML)==' \
        requirements.txt > requirements-server.txt \
    && pip install -r requirements-server.txt

COPY setup.py setup.cfg package.xml ./
COPY resource resource
COPY launch launch
COPY config config
COPY model_repository model_repository
COPY triton_ros triton_ros
RUN pip install --no-deps --use-pep517 . && cp -r model_repository /models

# Python models run in stub processes that exchange tensors through /dev/shm: give the
# container room there (docker run --shm-size=1g, or a memory-backed emptyDir in Kubernetes).
EXPOSE 8000 8001 8002
ENTRYPOINT ["triton-ros-server"]
CMD ["--model-repository", "/models", "--grpc-address", "0.0.0.0", "--http-address", "0.0.0.0", \
     "--metrics-address", "0.0.0.0"]
