"""The dashboard: static files (index.html, app.js, style.css) the server serves at /dashboard."""
