"""Listeners: uvicorn servers with the gateway's own limits, run side by side in one event loop."""
