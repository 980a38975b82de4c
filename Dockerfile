# One image for every process type of the Procfile (docker-compose.yml picks the type).
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY muse_experiments muse_experiments
# .dockerignore leaves routing/simulated (the simulated upstreams, a dev tool) out of the context.
COPY routing routing
COPY analytics analytics
COPY templates templates
COPY manage.py Procfile ./
RUN pip install . && useradd --system muse && mkdir -p var && chown muse var
USER muse
EXPOSE 8000
CMD ["python", "-m", "muse_experiments.infra.prodshape", "exec", "web"]
