"""DDP のレシピを torchrun 用の 1 本のスクリプトにしたもの。7 つのステップに番号を付けてある。
隣の recipe.md が各ステップを説明し、よくあるバグを一覧にしている。

    torchrun --standalone --nproc-per-node 2 ddp_recipe.py

マシンにランクの数だけ GPU がなければ gloo、あれば nccl（ランクごとに GPU 1 基）を使う。
合成データでの小さな回帰で、CPU なら数秒で終わる。
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 32  # オプティマイザの 1 ステップのサンプル数（全ランクの合計）
LR = 0.1


def make_dataset():
    gen = torch.Generator().manual_seed(0)  # 全ランクで同じデータ
    x = torch.randn(512, 4, generator=gen)
    return TensorDataset(x, torch.sin(x[:, :1]) + 0.5 * x[:, 1:2])


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def main(epochs, checkpoint):
    # ステップ 1 · セットアップ: プロセスグループに参加し、このランクのデバイスを選ぶ。GPU の番号は
    # LOCAL_RANK（マシンごとに 0 から数える）であって、RANK ではない。
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus_here >= int(os.environ["LOCAL_WORLD_SIZE"]):  # マシンの各ランクに GPU が 1 基ずつある
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # 以後、このプロセスのカレント GPU
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()  # グローバル: 全マシンを通した値

    # ステップ 2 · ラップ: DDP はランク 0 の重みを全ランクにコピーし、以後 backward() のたびに
    # 勾配をランク間で平均する。device_ids は GPU のときだけ。
    model = make_model().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    # ステップ 3 · サンプラー: 各ランクにデータの担当分と、グローバルバッチのうち自分の取り分
    # （ランクごとのバッチ × ワールドサイズがオプティマイザの 1 ステップのバッチ）。
    dataset = make_dataset()
    sampler = DistributedSampler(dataset)  # シャッフルする。DataLoader に shuffle=True は渡さない
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)

    for epoch in range(epochs):
        # ステップ 4 · 各エポックの最初に set_epoch: 呼ばないと、どのエポックもエポック 0 の
        # 順序を繰り返す。
        sampler.set_epoch(epoch)
        summed = torch.zeros(2, device=device)  # このランクの（損失 × サンプル数）の和とサンプル数
        for x, y in loader:
            # ステップ 5 · バッチをデバイスへ。順伝播、逆伝播（ここで DDP が勾配を平均する）、
            # ステップ。全ランクで同じ。
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            summed += torch.stack([loss.detach() * len(y), torch.tensor(len(y), device=device)])
        dist.all_reduce(summed)  # 集団通信: 全ランクが呼ぶ。`if rank == 0:` の中には置かない
        if rank == 0:  # 出力はランク 0 だけ
            print(f"epoch {epoch}: mean loss {(summed[0] / summed[1]).item():.4f}")

    # ステップ 6 · ジョブ全体で 1 回だけ保存: グローバルランク 0 が素のモデルの状態を保存する
    # （DDP 自身のキーは `module.` で始まる）。続いて、`if` の外で全ランクがバリア。
    # ファイルの書き込みが終わる前に読むランクが出ないように。
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)
        print(f"saved {checkpoint}")
    dist.barrier()

    # ステップ 7 · きれいに終了: 各ランクの最後の呼び出し。
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--checkpoint", default="recipe_checkpoint.pt")
    args = parser.parse_args()
    main(args.epochs, args.checkpoint)
