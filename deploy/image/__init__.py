"""The wattprobe images, built from Debian's archive without a container engine.

mmdebstrap makes each image's Debian root filesystem (one layer, cached by its inputs), the
project's wheel and its dependencies for the target platform make a second layer, and the
result is written as an OCI image layout and archive with every timestamp set to
SOURCE_DATE_EPOCH, so the same inputs give the same digests. `make image` runs `build.py`.
"""
