"""One module per resource of the admin API, each a factory of an APIRouter."""
