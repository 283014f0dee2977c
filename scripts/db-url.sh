# Sourced by scripts/demo.sh and examples/demo/smoke.sh (not run on its own).
# buzz_db_url URL DB: print the connection string of database DB on the same server as URL,
# which is a libpq URL (postgresql://user@host:port/db?params, params kept) or a key=value
# conninfo (a later dbname keyword wins).
buzz_db_url()
{
    local url="$1" db="$2" rest query=""
    if [[ "$url" == *://* ]]; then
        rest="${url#*://}"
        if [[ "$rest" == *\?* ]]; then
            query="?${rest#*\?}"
            rest="${rest%%\?*}"
        fi
        printf '%s\n' "${url%%://*}://${rest%%/*}/$db$query"
    else
        printf '%s\n' "$url dbname=$db"
    fi
}
