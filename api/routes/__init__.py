"""HTTP routes, one module per resource; each validates, calls one function and maps errors."""

from api.routes import health

ROUTERS = [health.router]
