from tests.oidc_provider.fixture import oidc_provider, start_oidc_provider  # noqa: F401 - fixtures
