/*
 * audit.c - the append-only audit trail. Rows are written inside the transaction whose outcome
 * they record (an accepted change never commits without its row); rejections that never reach
 * the lifecycle get a transaction of their own, and a run of identical rejections counted by
 * the caller is written as one row with its count and window (bf_audit_rejections). Every text
 * passes bf__audit_text() before it is stored.
 *
 * Design notes
 *
 * One place for every stored text. Each audit row's texts (stable ID, actor, authority, request
 * ID, outcome) come from a caller, and for a rejection they are whatever the request carried:
 * invalid UTF-8 (which PostgreSQL refuses with 22021, so the attempt would go unaudited and the
 * caller would see "data exception"), terminal or log control characters, and bidirectional
 * controls that make a row read differently from what it holds (U+202E turns "evil.txt" around).
 * bf__audit_text() therefore makes each of them valid UTF-8 in which every such character is
 * '?', then bounds it to its column on a character boundary with a "..." marker. Replacing,
 * not refusing: the audit must record the attempt, and '?' (one byte, never longer than what it
 * replaces) keeps the bound of the original text. An invalid sequence becomes one '?' per
 * maximal subpart (the longest prefix that could have started a valid character), the
 * replacement Unicode recommends, so "\xe2\x80" + "x" reads "?x" and not "??x".
 *
 * Replaced code points: C0 controls and DEL, C1 controls (U+0080..U+009F), the line and
 * paragraph separators U+2028/U+2029, and the bidirectional controls U+061C, U+200E, U+200F,
 * U+202A..U+202E and U+2066..U+2069. Everything else (accents, CJK, emoji) is kept.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define AUDIT_ID_MAX 81 /* bytes of a stored stable ID (CHECK octet_length <= 80) + terminator */

/* ---- text ------------------------------------------------------------------------------- */

/* Code points that never reach the audit as themselves. */
static bool audit_replaced(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
           cp == 0x200f || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/*
 * Decode the UTF-8 character at s (NUL-terminated). Returns its length (1..4) and sets *cp, or
 * returns 0 for an invalid sequence and sets *bad to the length of its maximal subpart (>= 1):
 * the bytes one '?' replaces. Overlong forms, surrogates and code points above U+10FFFF are
 * invalid.
 */
static size_t audit_utf8_next(const unsigned char *s, uint32_t *cp, size_t *bad)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    uint32_t v;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        v = c & 0x0f;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* beyond U+10FFFF */
    } else {
        *bad = 1; /* a continuation byte without a lead, 0xc0, 0xc1, 0xf5..0xff */
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        unsigned char b = s[i];
        bool ok = i == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf;
        if (!ok) {
            *bad = i;
            return 0;
        }
        v = v << 6 | (b & 0x3f);
    }
    *cp = v;
    return need;
}

void bf__audit_text(char *dst, size_t cap, const char *src)
{
    if (dst == NULL || cap == 0)
        return;
    const unsigned char *s = (const unsigned char *)(src ? src : "");
    size_t out = 0;
    bool cut = false;
    while (*s != '\0') {
        uint32_t cp = 0;
        size_t bad = 0;
        size_t n = audit_utf8_next(s, &cp, &bad);
        const unsigned char *piece = s;
        size_t piece_len = n;
        if (n == 0 || audit_replaced(cp)) {
            piece = (const unsigned char *)"?";
            piece_len = 1;
            n = n == 0 ? bad : n;
        }
        if (out + piece_len > cap - 1) {
            cut = true;
            break;
        }
        memcpy(dst + out, piece, piece_len);
        out += piece_len;
        s += n;
    }
    dst[out] = '\0';
    if (!cut || cap < 5)
        return;
    /* room for the marker, on a character boundary (dst is valid UTF-8 by now) */
    size_t end = out < cap - 4 ? out : cap - 4;
    while (end > 0 && ((unsigned char)dst[end] & 0xc0) == 0x80)
        end--;
    memcpy(dst + end, "...", 4);
}

static const char *audit_text(char *buf, size_t cap, const char *s)
{
    if (s == NULL)
        return NULL;
    bf__audit_text(buf, cap, s);
    return buf;
}

/* ---- writes ----------------------------------------------------------------------------- */

/* One audit row; count > 1 or a window makes it a coalesced row (window in microseconds since
 * the Unix epoch, both or neither). */
static bf_err audit_insert(bf_engine *e, const bf_audit_record *rec, int64_t count, bool has_window,
                           int64_t window_start_us, int64_t window_end_us)
{
    char id[AUDIT_ID_MAX], actor[BF_ACTOR_MAX], authority[BF_ACTOR_MAX], request[BF_REQUEST_ID_MAX],
        action[24];
    char outcome[BF_DIAG_MAX], generation[24], n[24], ws[24], we[24];
    const bf_actor *who = rec->who;
    bf__format(generation, sizeof generation, "%lld", (long long)rec->generation);
    bf__format(n, sizeof n, "%lld", (long long)count);
    bf__format(ws, sizeof ws, "%lld", (long long)window_start_us);
    bf__format(we, sizeof we, "%lld", (long long)window_end_us);
    const char *params[] = {
        audit_text(id, sizeof id, rec->backfill_id),
        audit_text(action, sizeof action, rec->action),
        who ? audit_text(actor, sizeof actor, who->actor) : NULL,
        audit_text(authority, sizeof authority, who && who->authority ? who->authority : "engine"),
        who ? audit_text(request, sizeof request, who->request_id) : NULL,
        rec->prior ? bf_state_name(rec->prior) : NULL,
        rec->result ? bf_state_name(rec->result) : NULL,
        rec->has_generation ? generation : NULL,
        audit_text(outcome, sizeof outcome, rec->outcome ? rec->outcome : ""),
        n,
        has_window ? ws : NULL,
        has_window ? we : NULL,
    };
    return bf__exec0(e, "write audit",
                     "INSERT INTO buzz_backfill.audit (backfill_id, action, actor, authority,"
                     " request_id, prior_state, result_state, generation, outcome, count,"
                     " window_start, window_end)"
                     " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, $10::integer,"
                     " 'epoch'::timestamptz + $11::bigint * interval '1 microsecond',"
                     " 'epoch'::timestamptz + $12::bigint * interval '1 microsecond')",
                     12, params);
}

bf_err bf__audit(bf_engine *e, const bf_audit_record *rec)
{
    return audit_insert(e, rec, 1, false, 0, 0);
}

static bf_err audit_rejected(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                             bf_err err, const char *outcome, int64_t count, bool has_window,
                             int64_t window_start_us, int64_t window_end_us)
{
    if (e == NULL || action == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err rc = bf__ensure_conn(e);
    if (rc != BF_OK)
        return rc;
    char text[BF_DIAG_MAX];
    bf__format(text, sizeof text, "rejected: %s%s%s", bf_err_str(err), outcome ? ": " : "",
               outcome ? outcome : "");
    bf_audit_record rec = {.backfill_id = id, .action = action, .who = who, .outcome = text};
    return audit_insert(e, &rec, count, has_window, window_start_us, window_end_us);
}

bf_err bf_audit_rejection(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                          bf_err err, const char *outcome)
{
    return audit_rejected(e, action, id, who, err, outcome, 1, false, 0, 0);
}

bf_err bf_audit_rejections(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                           bf_err err, const char *outcome, int64_t count, int64_t window_start_us,
                           int64_t window_end_us)
{
    if (count < 1 || count > INT32_MAX || window_end_us < window_start_us)
        return BF_ERR_INVALID_ARGUMENT;
    return audit_rejected(e, action, id, who, err, outcome, count, true, window_start_us,
                          window_end_us);
}

/* ---- reads ------------------------------------------------------------------------------ */

bf_err bf_audit_list(bf_engine *e, const char *id, int64_t before_seq, bf_audit_entry *out,
                     int limit, int *count_out)
{
    if (e == NULL || out == NULL || count_out == NULL || limit < 1 || limit > 1000)
        return BF_ERR_INVALID_ARGUMENT;
    if (id != NULL && !bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    char before[24], lim[16];
    bf__format(before, sizeof before, "%lld", (long long)before_seq);
    bf__format(lim, sizeof lim, "%d", limit);
    const char *params[] = {id, before_seq > 0 ? before : NULL, lim};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "read audit",
                   "SELECT seq, (extract(epoch FROM at) * 1000000)::bigint, backfill_id, action,"
                   " actor, authority, request_id, prior_state, result_state, generation, outcome,"
                   " count, (extract(epoch FROM window_start) * 1000000)::bigint,"
                   " (extract(epoch FROM window_end) * 1000000)::bigint"
                   " FROM buzz_backfill.audit"
                   " WHERE ($1::text IS NULL OR backfill_id = $1)"
                   " AND ($2::bigint IS NULL OR seq < $2::bigint)"
                   " ORDER BY seq DESC LIMIT $3::integer",
                   3, params);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    for (int i = 0; i < n; i++) {
        bf_audit_entry *a = &out[i];
        memset(a, 0, sizeof *a);
        a->seq = bf__field_i64(r, i, 0);
        a->at = bf__field_i64(r, i, 1);
        bf__copy(a->backfill_id, sizeof a->backfill_id, bf__field(r, i, 2));
        bf__copy(a->action, sizeof a->action, bf__field(r, i, 3));
        bf__copy(a->actor, sizeof a->actor, bf__field(r, i, 4));
        bf__copy(a->authority, sizeof a->authority, bf__field(r, i, 5));
        bf__copy(a->request_id, sizeof a->request_id, bf__field(r, i, 6));
        bf_state st;
        if (bf_state_parse(bf__field(r, i, 7), &st) == BF_OK)
            a->prior = st;
        if (bf_state_parse(bf__field(r, i, 8), &st) == BF_OK)
            a->result = st;
        a->has_generation = !bf__isnull(r, i, 9);
        a->generation = bf__field_i64(r, i, 9);
        bf__copy(a->outcome, sizeof a->outcome, bf__field(r, i, 10));
        a->count = bf__field_i64(r, i, 11);
        a->has_window = !bf__isnull(r, i, 12) && !bf__isnull(r, i, 13);
        a->window_start = bf__field_i64(r, i, 12);
        a->window_end = bf__field_i64(r, i, 13);
    }
    PQclear(r);
    *count_out = n;
    return BF_OK;
}
