# Stand-in for python:3.11-slim: Debian bookworm's python3 (3.11) with venv and CA certificates,
# on a base imported from an mmdebstrap tarball by scripts/images.sh.
ARG BASE=jobrelay-stand-in/python-base:bookworm
FROM ${BASE}
LABEL org.jobrelay.stand-in="python:3.11-slim from Debian bookworm packages (scripts/images.sh)"
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python3"]
