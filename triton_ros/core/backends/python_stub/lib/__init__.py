"""Put on the stub's sys.path so that ``import triton_python_backend_utils`` finds this module."""
