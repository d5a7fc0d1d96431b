"""FederatedData: each client's tensors are exactly its partition's samples, packed client
after client in one tensor per split."""
import torch

from pflcore.data.sources import load_dataset
from pflcore.engine import build_data


def test_client_tensors_are_their_partition_samples_in_one_pack(make_config):
    config = make_config()
    data = build_data(config)
    partition = data.partition  # indices into the pooled train + test samples
    source = load_dataset(config.dataset, root=config.data_root)
    pooled_x = torch.cat([source.train_x, source.test_x]).float() / 255.0
    pooled_y = torch.cat([source.train_y, source.test_y])
    mean = torch.tensor(source.mean).view(1, -1, 1, 1)
    std = torch.tensor(source.std).view(1, -1, 1, 1)
    for split, packed_x, packed_y, indices in (("train", data.train_x, data.train_y, partition.train),
                                               ("test", data.test_x, data.test_y, partition.test)):
        start = 0
        for cid, idx in enumerate(indices):
            client = getattr(data, split)[cid]
            index = torch.tensor(idx, dtype=torch.long)
            assert torch.equal(client.y, pooled_y[index])
            torch.testing.assert_close(client.x, (pooled_x[index] - mean) / std, rtol=0, atol=1e-6)
            # a view of its rows of the pack, in client order
            assert client.x.data_ptr() == packed_x[start].data_ptr()
            assert torch.equal(client.y, packed_y[start:start + len(idx)])
            assert client.x.is_contiguous(memory_format=torch.channels_last)
            start += len(idx)
        assert start == packed_x.shape[0] == packed_y.shape[0]
    assert data.all_test_x() is data.test_x
