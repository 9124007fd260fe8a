"""The API's routes, one router per resource; ``api/app.py`` includes them in this order:
``jobs``, ``admin``, ``health`` (the OpenAPI document lists them so)."""
