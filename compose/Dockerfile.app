# syntax=docker/dockerfile:1
# Template: the worker image of your own app, the harel worker image (compose/Dockerfile.worker) with your app in it.
# Copy it into your app's folder as `Dockerfile` (the folder with pyproject.toml, your package and its charts) and
# build there; docs/deploying-your-app.md walks through it for the README's order app:
#   docker build --build-arg HAREL_WORKER_IMAGE=registry.example/harel-stack/worker:0.1.0 \
#     -t registry.example/shop/order-worker:1.0.0 .
# Everything in the folder is sent and copied: list build output, virtualenvs and .git in a .dockerignore beside it.

# The worker image to build on: compose/Dockerfile.worker's, as pushed to your registry. compose/app.yml (`make up`)
# sets it to the one the stack builds.
ARG HAREL_WORKER_IMAGE=harel-stack/worker:0.1.0

# Named `worker` like the last stage of compose/Dockerfile.worker: compose/app.yml keeps the stack's `target: worker`.
FROM ${HAREL_WORKER_IMAGE} AS worker
# What pip installs, relative to the folder: the folder itself (a project with pyproject.toml) or a wheel built from
# it, e.g. dist/orders-1.0.0-py3-none-any.whl. Its dependencies come along; harel is in the image already.
ARG HAREL_APP_PACKAGE=.
# Root only to install: the worker image's user (uid 10001) cannot write the image's Python.
USER 0:0
# From a read-write bind mount of the folder: pip builds a source project in place, and what it writes there is
# dropped with the mount instead of landing in /app.
RUN --mount=type=bind,target=/tmp/app-source,rw \
    pip install --no-cache-dir --root-user-action=ignore "/tmp/app-source/${HAREL_APP_PACKAGE}"
# The folder as it is, root's and read-only for the worker: its working directory. `harel worker --app` imports
# from it, and relative paths in the app (the README's `app.chart("charts/order.yaml")`) resolve there, as when you
# run harel in the folder.
WORKDIR /app
COPY . .
USER 10001:10001
# The worker image's entrypoint is `harel`: this runs `harel worker --app <module:attribute>`, your App. The Helm
# chart gives its own arguments (worker.app), compose/app.yml its own command (HAREL_APP): name the same App there.
CMD ["worker", "--app", "orders.app:app"]
