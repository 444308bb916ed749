"""Framework integrations built on jobpool's public API (DESIGN section 11, "apps"):
``jobpool.contrib.django`` and ``jobpool.contrib.asgi``. Each imports its framework
only when it is imported itself; jobpool never imports them."""
