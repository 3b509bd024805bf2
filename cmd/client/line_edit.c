/* Line input of `llmbus chat`; see line_edit.h. libedit's own read function is replaced
 * (EL_GETCFN) by one that gives up on an interrupt: libedit's retries an interrupted read once
 * and so would swallow a Ctrl-C. The wait is ppoll with SIGINT and SIGTERM blocked outside it,
 * so a Ctrl-C that lands while libedit redraws (not in the read) is not lost either: it is
 * either in the caller's flag, checked after blocking, or pending and ends the ppoll. */
#include "cmd/client/line_edit.h"

#include <errno.h>
#include <histedit.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#define LINE_EDIT_HISTORY_SIZE 1000

struct line_edit {
  EditLine *el; /* NULL when `in` is not a terminal */
  History *hist;
  const char *prompt;
  FILE *in;
  int fd;
  bool (*pending_interrupt)(void); /* the caller's SIGINT flag; may be NULL */
  bool interrupted; /* the last read ended on an interrupt */
  bool was_empty;   /* ... with nothing typed */
  char *plain;      /* getline's buffer (not a terminal) */
  size_t plain_cap;
};

static char *prompt_of(EditLine *el) {
  struct line_edit *le = NULL;
  el_get(el, EL_CLIENTDATA, &le);
  return (char *)(le ? le->prompt : "");
}

/* Waits until le->fd is readable: 1 readable, 0 interrupted (a signal came, before or during
 * the wait), -1 error. SIGINT/SIGTERM are blocked from the flag's check to the ppoll, which
 * unblocks them atomically. */
static int wait_readable(struct line_edit *le) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  int r = 0;
  if (!le->pending_interrupt || !le->pending_interrupt()) {
    struct pollfd pfd = {.fd = le->fd, .events = POLLIN};
    r = ppoll(&pfd, 1, NULL, &old);
    if (r < 0) r = errno == EINTR ? 0 : -1;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return r;
}

/* One character for libedit: 1 read, 0 end of input, -1 error or interrupt. Multibyte input
 * is decoded by the locale (mbrtowc), a byte at a time. */
static int read_char(EditLine *el, wchar_t *wc) {
  struct line_edit *le = NULL;
  el_get(el, EL_CLIENTDATA, &le);
  mbstate_t mbs;
  memset(&mbs, 0, sizeof mbs);
  for (;;) {
    char c;
    int w = wait_readable(le);
    ssize_t r = w > 0 ? read(le->fd, &c, 1) : -1;
    if (r == 0) return 0;
    if (r < 0) {
      if (w < 0 || (w > 0 && errno != EINTR)) return -1;
      const LineInfoW *li = el_wline(el);
      le->interrupted = true;
      le->was_empty = !li || li->lastchar == li->buffer;
      return -1;
    }
    size_t k = mbrtowc(wc, &c, 1, &mbs);
    if (k == (size_t)-2) continue; /* more bytes of this character */
    if (k == (size_t)-1) {         /* not valid in the locale: pass the byte on */
      *wc = (wchar_t)(unsigned char)c;
      return 1;
    }
    if (k == 0) *wc = L'\0';
    return 1;
  }
}

llb_status line_edit_create(const char *prog, const char *prompt, FILE *in, FILE *out,
                            bool (*pending_interrupt)(void), struct line_edit **out_le) {
  *out_le = NULL;
  struct line_edit *le = calloc(1, sizeof *le);
  if (!le) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "line editor");
  le->prompt = prompt;
  le->pending_interrupt = pending_interrupt;
  le->in = in;
  le->fd = fileno(in);
  if (le->fd < 0 || !isatty(le->fd)) {
    *out_le = le;
    return LLB_STATUS_OK;
  }
  le->el = el_init(prog, in, out, stderr);
  le->hist = history_init();
  if (!le->el || !le->hist) {
    line_edit_destroy(le);
    return LLB_ERRF(LLB_STATUS_INTERNAL, "libedit would not start on this terminal");
  }
  HistEvent ev;
  history(le->hist, &ev, H_SETSIZE, LINE_EDIT_HISTORY_SIZE);
  history(le->hist, &ev, H_SETUNIQUE, 1);
  el_set(le->el, EL_CLIENTDATA, le);
  el_set(le->el, EL_EDITOR, "emacs");
  el_set(le->el, EL_PROMPT, prompt_of);
  el_set(le->el, EL_HIST, history, le->hist);
  el_set(le->el, EL_GETCFN, read_char);
  el_source(le->el, NULL); /* the user's ~/.editrc, as every libedit program reads it */
  *out_le = le;
  return LLB_STATUS_OK;
}

bool line_edit_is_tty(const struct line_edit *le) { return le && le->el; }

static enum line_edit_result read_plain(struct line_edit *le, const char **line, bool *was_empty) {
  errno = 0;
  ssize_t len = getline(&le->plain, &le->plain_cap, le->in);
  if (len < 0) {
    bool eintr = errno == EINTR;
    clearerr(le->in);
    *was_empty = true;
    return eintr ? LINE_EDIT_INTERRUPTED : LINE_EDIT_EOF;
  }
  while (len > 0 && (le->plain[len - 1] == '\n' || le->plain[len - 1] == '\r')) le->plain[--len] = '\0';
  *line = le->plain;
  return LINE_EDIT_LINE;
}

enum line_edit_result line_edit_read(struct line_edit *le, const char **line, bool *was_empty) {
  *line = NULL;
  *was_empty = false;
  if (!le->el) return read_plain(le, line, was_empty);
  le->interrupted = false;
  int count = 0;
  const char *s = el_gets(le->el, &count);
  if (le->interrupted) {
    *was_empty = le->was_empty;
    return LINE_EDIT_INTERRUPTED;
  }
  if (!s || count <= 0) return LINE_EDIT_EOF;
  free(le->plain);
  le->plain = strdup(s);
  if (!le->plain) return LINE_EDIT_EOF;
  size_t len = strlen(le->plain);
  while (len > 0 && (le->plain[len - 1] == '\n' || le->plain[len - 1] == '\r')) le->plain[--len] = '\0';
  *line = le->plain;
  return LINE_EDIT_LINE;
}

void line_edit_history_add(struct line_edit *le, const char *line) {
  if (!le || !le->hist || !line || !*line) return;
  HistEvent ev;
  history(le->hist, &ev, H_ENTER, line);
}

void line_edit_destroy(struct line_edit *le) {
  if (!le) return;
  if (le->el) el_end(le->el); /* restores the terminal's mode */
  if (le->hist) history_end(le->hist);
  free(le->plain);
  free(le);
}
