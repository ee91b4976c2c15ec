FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap && rm -rf /var/lib/apt/lists/*
# A root worker hands every sandboxed run to this unprivileged user (CLEAR_EVOLUTION_SANDBOX_USER). bwrap inside a
# container also needs the container to allow namespaces (e.g. Docker's --security-opt seccomp=unconfined, or
# CLEAR_EVOLUTION_MIN_SANDBOX=docker with the host's engine).
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin clear-sandbox
WORKDIR /app
# CPU torch first: an unpinned torch pulls several GB of CUDA.
RUN pip install torch --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY . .
RUN pip install -e . && SECRET_KEY=build-only python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["gunicorn", "clear.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "2", "--timeout", "120"]
