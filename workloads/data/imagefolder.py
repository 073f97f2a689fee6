"""A torchvision ImageFolder tree the user gives (one sub-folder of images per class, such as an ImageNet copy): its
classes and images as torchvision lists them (image_tree, which the parent also uses to check the tree and count its
classes), and the data set with the usual transforms (image_folder_dataset). torchvision is imported inside the
functions only, after the folder is checked."""

from __future__ import annotations

import os

from workloads.data.names import DataError


def image_tree(data_dir: str | None) -> tuple[list[str], list]:
    """(class names, (path, class index) per image) of an ImageFolder tree, as torchvision lists it."""
    if not data_dir:
        raise DataError("--data imagefolder needs --data-dir: a folder with one sub-folder of images per class")
    if not os.path.isdir(data_dir):
        raise DataError(f"--data-dir {data_dir} is not a folder")
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    try:
        classes, index = find_classes(data_dir)
        samples = make_dataset(data_dir, index, extensions=IMG_EXTENSIONS)
    except (FileNotFoundError, OSError) as exc:
        raise DataError(
            f"--data-dir {data_dir}: not an image folder tree ({exc}); it needs one sub-folder of images per class"
        ) from None
    return classes, samples


def image_folder_dataset(data_dir, *, channels, image, train=True):
    """An ImageFolder tree with the usual transforms: RandomResizedCrop and a flip for training, Resize and a
    centre crop for evaluation; normalised (ImageNet's statistics for colour, 0.5 for grey)."""
    from torchvision import datasets, transforms

    grey = [transforms.Grayscale(num_output_channels=1)] if channels == 1 else []
    mean, std = ((0.5,), (0.5,)) if channels == 1 else ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    shape = (
        [transforms.RandomResizedCrop(image), transforms.RandomHorizontalFlip()]
        if train
        else [transforms.Resize(int(image * 8 / 7)), transforms.CenterCrop(image)]
    )
    return datasets.ImageFolder(
        data_dir, transforms.Compose([*shape, *grey, transforms.ToTensor(), transforms.Normalize(mean, std)])
    )
