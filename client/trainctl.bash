# bash completion for trainctl                               -*- shell-script -*-
# Installed to share/bash-completion/completions/trainctl.

_trainctl_jobs()
{
    # Job ids from the daemon, if one answers; quietly nothing otherwise.
    trainctl queue --json 2>/dev/null | tr ',' '\n' |
        sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p'
}

_trainctl()
{
    local cur prev words cword
    _init_completion || return
    local cmds="submit queue ls show watch logs cancel pause resume checkpoint trace top config version pack plan bench-input export eval predict"
    if ((cword == 1)); then
        COMPREPLY=($(compgen -W "$cmds --help" -- "$cur"))
        return
    fi
    local cmd=${words[1]}
    case $prev in
        --steps | -n | --interval | -d | --batch | --classes | --workspace-mib | --input)
            return ;;
        --socket | -o | --output | --data | --idx-dir | --imagefolder | --checkpoint-dir)
            _filedir
            return ;;
        --spec | --idx-images | --idx-labels)
            _filedir
            return ;;
        --state)
            COMPREPLY=($(compgen -W "pending running suspended completed cancelled failed" -- "$cur"))
            return ;;
    esac
    case $cmd in
        submit)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--name --set --follow --json --socket --help" -- "$cur"))
            else
                _filedir json
            fi ;;
        show | watch | cancel | pause | resume | checkpoint)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--json --socket --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_trainctl_jobs)" -- "$cur"))
            fi ;;
        logs)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--follow -f --lines --json --socket --help" -- "$cur"))
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
            COMPREPLY=($(compgen -W "--state --json --socket --help" -- "$cur")) ;;
        config)
            if ((cword == 2)); then
                COMPREPLY=($(compgen -W "get set --help" -- "$cur"))
            elif ((cword == 3)); then
                COMPREPLY=($(compgen -W "workers prefetch checkpoint_every_steps checkpoint_keep subscriber_soft_bytes subscriber_max_bytes log_level device socket state_dir allowed_data_roots metrics_listen" -- "$cur"))
            fi ;;
        version)
            COMPREPLY=($(compgen -W "--json --socket --help" -- "$cur")) ;;
        pack)
            COMPREPLY=($(compgen -W "--idx-images --idx-labels --idx-dir --imagefolder -o --output --quality --shard-size --prefix --index --restart --threads --json --help" -- "$cur")) ;;
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
                        _filedir json
                    fi ;;
            esac ;;
        bench-input)
            COMPREPLY=($(compgen -W "--data --spec --size --channels --augment --workers --batch --epochs --prefetch --seed --layout --eval --json --help" -- "$cur")) ;;
        export)
            COMPREPLY=($(compgen -W "-o --output --format --json --socket --help" -f -- "$cur")) ;;
        eval)
            COMPREPLY=($(compgen -W "--batch --workers --json --socket --help" -f -- "$cur")) ;;
        predict)
            COMPREPLY=($(compgen -W "--top --json --socket --help" -f -- "$cur")) ;;
    esac
}
complete -F _trainctl trainctl
