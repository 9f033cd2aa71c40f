# bash completion for dgrr (installed to share/bash-completion/completions/dgrr).
# Commands are listed here (tests/cli/completion_test.cc checks the list is
# every registered command); a command's options are read from its own
# `dgrr COMMAND --help` when asked, so they never fall out of date.

_dgrr_commands="bisect compare diff-tensor env help inspect plan replay report rollback train verify"

_dgrr() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local prev="${COMP_WORDS[COMP_CWORD-1]}"
  local dgrr="${COMP_WORDS[0]}"
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "$_dgrr_commands --help --version" -- "$cur"))
    return 0
  fi
  local command="${COMP_WORDS[1]}"
  if [[ "$command" == help ]]; then
    [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "${_dgrr_commands/help /}" -- "$cur"))
    return 0
  fi
  if [[ "$cur" == -* ]]; then
    # The options of `dgrr COMMAND --help`: each "--name" at the start of an option line.
    local options
    options="$("$dgrr" "$command" --help 2>/dev/null | sed -n '/^Options/,/^Exit codes/ s/^  \(-[a-zA-Z] \[ \)\{0,1\}\(--[a-z][a-z-]*\).*/\2/p')"
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
    return 0
  fi
  case "$prev" in
    --model) COMPREPLY=($(compgen -W "tiny small" -- "$cur")); return 0 ;;
    --mode) COMPREPLY=($(compgen -W "full sdc trusted off" -- "$cur")); return 0 ;;
    --type) COMPREPLY=($(compgen -W "boundary step event name" -- "$cur")); return 0 ;;
  esac
  # Positional arguments and option values are files or run directories.
  COMPREPLY=($(compgen -f -- "$cur"))
  return 0
}

complete -o filenames -F _dgrr dgrr
