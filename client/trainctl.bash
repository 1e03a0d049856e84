# bash completion for trainctl                               -*- shell-script -*-
# Installed to share/bash-completion/completions/trainctl.
# Uses the bash-completion package's helpers when they are loaded and
# plain compgen otherwise.  Keep the option lists in step with each
# command's --help (tests/live/test_completion.sh checks a few).

# Job ids from the daemon the command line talks to, if one answers;
# quietly nothing otherwise.
_trainctl_jobs()
{
    trainctl ${_trainctl_socket:+--socket "$_trainctl_socket"} queue --json \
        2>/dev/null | tr ',{' '\n\n' | sed -n 's/^"id":\([0-9][0-9]*\).*/\1/p'
}

_trainctl_files()
{
    if declare -F _filedir >/dev/null; then
        _filedir "$@"
    else
        local IFS=$'\n'
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_trainctl()
{
    local cur prev cword words
    if declare -F _init_completion >/dev/null; then
        _init_completion -n = || return
    else
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
    fi
    local cmds="submit queue ls show watch logs cancel pause resume checkpoint rm extend history plot trace top config version pack plan bench-input export eval predict"
    # Global options may come before the command (trainctl --socket X ls).
    local i=1 cmd="" _trainctl_socket=""
    while ((i < cword)); do
        case ${words[i]} in
            --socket) _trainctl_socket=${words[i + 1]}; ((i += 2)) ;;
            --socket=*) _trainctl_socket=${words[i]#--socket=}; ((i++)) ;;
            --json) ((i++)) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        if [[ $prev == --socket ]]; then
            _trainctl_files
        else
            COMPREPLY=($(compgen -W "$cmds --socket --json --help" -- "$cur"))
        fi
        return
    fi
    local argi=$((cword - i)) # position after the command (1 = first)
    case $prev in
        --steps | -n | --lines | --interval | -d | --name | --set | --size | \
            --last | --ended-before | \
            --channels | --workers | --batch | --epochs | --prefetch | --seed | \
            --quality | --shard-size | --prefix | --threads | --val-fraction | \
            --classes | --workspace-mib | --input | --top | -k | -b)
            return ;;
        --socket | -o | --output | --data | --idx-dir | --imagefolder | --checkpoint-dir)
            _trainctl_files
            return ;;
        --spec | --idx-images | --idx-labels)
            _trainctl_files
            return ;;
        --format)
            COMPREPLY=($(compgen -W "safetensors onnx" -- "$cur"))
            return ;;
        --device)
            COMPREPLY=($(compgen -W "auto cpu cuda cuda:0" -- "$cur"))
            return ;;
        --state)
            # the job states as trainctl names them (its one list); rm
            # removes ended jobs only
            if [[ $cmd == rm ]]; then
                COMPREPLY=($(compgen -W "completed failed cancelled" -- "$cur"))
                return
            fi
            COMPREPLY=($(compgen -W "$(trainctl queue --help 2>/dev/null |
                sed -n 's/^States: //p' | tr -d ,)" -- "$cur"))
            return ;;
        --index)
            COMPREPLY=($(compgen -W "0 1 2 4 8" -- "$cur"))
            return ;;
        --restart)
            COMPREPLY=($(compgen -W "0 1 2 4 8" -- "$cur"))
            return ;;
        --layout)
            COMPREPLY=($(compgen -W "nhwc nchw" -- "$cur"))
            return ;;
        --augment)
            # A comma-separated list of op names: complete the last one.
            local ops="random_resized_crop pad_crop center_crop resize flip color_jitter none"
            local head="" last=$cur
            if [[ $cur == *,* ]]; then
                head=${cur%,*},
                last=${cur##*,}
            fi
            COMPREPLY=($(compgen -P "$head" -W "$ops" -- "$last"))
            compopt -o nospace 2>/dev/null
            return ;;
    esac
    case $cmd in
        submit)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--name --set --follow -f --json --socket --help" -- "$cur"))
            else
                _trainctl_files
            fi ;;
        show | watch | cancel | pause | resume | checkpoint)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        rm)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--force -f --state --ended-before --mine --dry-run --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        extend)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--epochs --set --name --follow -f --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        history)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--csv --windows --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        logs)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--follow -f --lines --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        plot)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--output -o --size --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        trace)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--steps -n --output -o --json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        top)
            COMPREPLY=($(compgen -W "--interval -d --once --json --socket --help" -- "$cur")) ;;
        queue | ls)
            COMPREPLY=($(compgen -W "--last --mine --active --state --all --json --socket --help" -- "$cur")) ;;
        config)
            if ((argi == 1)); then
                COMPREPLY=($(compgen -W "get set --help" -- "$cur"))
            elif ((argi == 2)); then
                # every key of traind --help-config (tests/live/test_completion.sh)
                COMPREPLY=($(compgen -W "workers prefetch checkpoint_every_steps checkpoint_keep subscriber_soft_bytes subscriber_max_bytes log_level device socket state_dir allowed_data_roots metrics_listen max_job_memory_mb max_job_device_memory_mb max_crash_restarts max_queued_per_user max_subscriptions_per_user max_connections_per_user ended_job_retention_days jobs_visible_to_all" -- "$cur"))
            fi ;;
        version)
            COMPREPLY=($(compgen -W "--json --socket --help" -- "$cur")) ;;
        pack)
            COMPREPLY=($(compgen -W "--idx-images --idx-labels --idx-dir --imagefolder -o --output --quality --shard-size --prefix --index --restart --threads --val-fraction --seed --json --help" -- "$cur")) ;;
        plan)
            case $prev in
                --precision)
                    COMPREPLY=($(compgen -W "fp32 tf32 bf16 fp16" -- "$cur")) ;;
                --optimizer)
                    COMPREPLY=($(compgen -W "sgd momentum adamw" -- "$cur")) ;;
                *)
                    if [[ $cur == -* ]]; then
                        COMPREPLY=($(compgen -W "--batch --precision --input --classes --optimizer --workspace-mib --json --help" -- "$cur"))
                    else
                        COMPREPLY=($(compgen -W "fmnist-cnn resnet20 resnet18 resnet50" -- "$cur"))
                        _trainctl_files json
                    fi ;;
            esac ;;
        export)
            COMPREPLY=($(compgen -W "-o --output --format --json --socket --help" -f -- "$cur")) ;;
        eval)
            COMPREPLY=($(compgen -W "--batch -b --workers --daemon --device --json --socket --help" -f -- "$cur")) ;;
        predict)
            COMPREPLY=($(compgen -W "--top -k --daemon --device --json --socket --help" -f -- "$cur")) ;;
        bench-input)
            COMPREPLY=($(compgen -W "--data --spec --size --channels --augment --workers --batch --epochs --prefetch --seed --layout --eval --json --help" -- "$cur")) ;;
    esac
}
complete -F _trainctl trainctl
