/* Reading the user's lines for `llmbus chat`: on a terminal, line editing and history with
 * libedit (BSD editline: emacs keys, arrows, Up/Down through this session's lines); anything
 * else (a pipe, a file) is read plainly, one line at a time, no prompt.
 *
 * Ctrl-C is the caller's SIGINT handler (client_install_sigint: no SA_RESTART) and its flag
 * (`pending_interrupt`): a signal that comes while the editor waits for a key, or one that came
 * while it was busy redrawing, makes line_edit_read answer LINE_EDIT_INTERRUPTED, saying
 * whether the line being typed was empty. Threading: one thread.
 */
#ifndef LLB_CMD_LINE_EDIT_H
#define LLB_CMD_LINE_EDIT_H

#include <stdbool.h>
#include <stdio.h>

#include "base/status.h"

struct line_edit;

enum line_edit_result {
  LINE_EDIT_LINE = 0,        /* a line (without its line end) */
  LINE_EDIT_EOF = 1,         /* Ctrl-D on an empty line, or the end of the input */
  LINE_EDIT_INTERRUPTED = 2, /* Ctrl-C (SIGINT) while reading */
};

/* Starts reading `in` (a terminal gets libedit, prompting `prompt` on `out`; borrowed, must
 * outlive the editor). `pending_interrupt` (NULL: none) says whether the caller's SIGINT
 * handler has fired and not been cleared. Errors: OUT_OF_MEMORY, INTERNAL (libedit would not
 * start). *out: line_edit_destroy(). */
llb_status line_edit_create(const char *prog, const char *prompt, FILE *in, FILE *out,
                            bool (*pending_interrupt)(void), struct line_edit **out_le);

/* True when `le` edits a terminal (libedit), false when it reads plainly. */
bool line_edit_is_tty(const struct line_edit *le);

/* Reads one line. LINE_EDIT_LINE: *line (valid until the next call) is the line without its
 * end. LINE_EDIT_INTERRUPTED: *was_empty says whether nothing had been typed (the line is
 * discarded either way). Never fails otherwise: a read error is LINE_EDIT_EOF. */
enum line_edit_result line_edit_read(struct line_edit *le, const char **line, bool *was_empty);

/* Adds a line to the history that Up/Down walk (ignored when not a terminal or line is empty). */
void line_edit_history_add(struct line_edit *le, const char *line);

/* Restores the terminal and frees everything; NULL ok. */
void line_edit_destroy(struct line_edit *le);

#endif
