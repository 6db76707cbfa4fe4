# bash completion for schedpolicyctl(1)
# Installed to /usr/share/bash-completion/completions/schedpolicyctl.

_schedpolicyctl() {
    local cur prev words cword
    _init_completion || return

    local commands="status set auto reset watch top workloads exempt unexempt workload-policy run launch rebalance energy version help"
    local policies="performance balance powersaving"

    # Find the command (the first word that is not an option or its value).
    local i cmd="" dashdash=0
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --bus) ((i++)) ;;
            --) dashdash=$i; break ;;
            -*) ;;
            *) [[ -z $cmd ]] && cmd=${words[i]} ;;
        esac
    done

    # After "--" of run/launch: complete the command to execute.
    if ((dashdash > 0)); then
        _command_offset $((dashdash + 1))
        return
    fi

    case $prev in
        --bus)
            COMPREPLY=($(compgen -W "system session" -- "$cur"))
            return ;;
        --policy)
            COMPREPLY=($(compgen -W "$policies" -- "$cur"))
            return ;;
        --name|--reason)
            return ;;
    esac

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--bus --json --help" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    case $cmd in
        status|workloads|watch|energy)
            COMPREPLY=($(compgen -W "--json --bus --help" -- "$cur")) ;;
        set)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--bus --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$policies" -- "$cur"))
            fi ;;
        auto)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--bus --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "0 1 2" -- "$cur"))
            fi ;;
        run)
            COMPREPLY=($(compgen -W "--name --bus --help --" -- "$cur")) ;;
        launch)
            COMPREPLY=($(compgen -W "--policy --reason --bus --help --" -- "$cur")) ;;
        rebalance|reset|top|exempt|unexempt)
            COMPREPLY=($(compgen -W "--bus --help" -- "$cur")) ;;
        workload-policy)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--bus --help" -- "$cur"))
            elif ((cword >= 3)) && [[ $prev != workload-policy ]]; then
                COMPREPLY=($(compgen -W "performance none" -- "$cur"))
            fi ;;
        help)
            COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
    esac
} &&
    complete -F _schedpolicyctl schedpolicyctl
