"""The kubelet's PodResources API: which container holds which device (GPUs for wattprobe).

api.proto is the upstream v1 API; api_pb2*.py(i) are generated from it (checked in, pinned
grpcio-tools; tests/kube/test_podresources_stubs.py fails when they drift). Import client.py only
when PodResources is in use: it loads grpc.
"""
