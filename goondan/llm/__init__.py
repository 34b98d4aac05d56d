"""Model adapters: one contract (base.py), urllib3 transport (http.py), providers, test models."""
