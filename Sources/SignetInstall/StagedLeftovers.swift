#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetNetwork
import SignetPackage

/// Staging trees that earlier runs of an update left beside DIR (killed, or their link
/// dropped), taken over: moved aside under this process's name, and their files of the right
/// size moved (renamed) into the new staging tree, then hashed against the manifest when their
/// turn comes, rather than fetched or copied again. What is left of them is removed once the
/// plan is made, so that DIR never has more than one staging tree beside it, however many runs
/// fail; a run whose link drops in turn leaves its own staging tree for the next.
final class StagedLeftovers {
    let destination: String
    private(set) var trees: [(root: SharedDescriptor, path: String, token: Int)] = []
    /// Most trees taken over: older ones are removed.
    static let maximum = 4

    init(destination: String) { self.destination = destination }

    /// Takes over the staging trees dead processes left beside DIR, newest first (DIR's lock is
    /// held: no live process is using them). Call before stale temporaries are removed.
    func adopt() {
        for (directory, name) in TemporaryFiles.staleTrees(besides: destination, tags: ["staging", "salvage"]).prefix(Self.maximum) {
            let aside = TemporaryFiles.name(besides: destination, tag: "salvage")
            let token = TemporaryFiles.register(aside, tree: true)
            // What earlier runs fetched outlives an interruption of this one too.
            TemporaryFiles.keepOnInterruption(token)
            guard (try? TemporaryFiles.guarded({ rename(directory + "/" + name, aside) == 0 })) == true,
                let opened = try? Paths.open(aside, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            else {
                TemporaryFiles.unregister(token)
                continue
            }
            trees.append((SharedDescriptor(opened), aside, token))
        }
    }

    /// Takes over this process's own staging tree at `path` (an attempt that failed and is
    /// tried again, or left for the next run by ``keep()``).
    func adopt(_ path: String) {
        let token = TemporaryFiles.register(path, tree: true)
        TemporaryFiles.keepOnInterruption(token)
        guard let opened = try? Paths.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) else {
            TemporaryFiles.unregister(token)
            return
        }
        trees.append((SharedDescriptor(opened), path, token))
    }

    /// Removes the trees (the update ended, or what they held is in the new staging tree).
    func remove() {
        for tree in trees {
            _ = TreeRemover.remove(tree.path)
            TemporaryFiles.unregister(tree.token)
        }
        trees.removeAll()
    }

    /// Leaves the trees beside DIR for the next run (still named as this process's, which the
    /// next run takes for a dead one's).
    func keep() {
        for tree in trees {
            TemporaryFiles.unregister(tree.token)
        }
        trees.removeAll()
    }
}
