import SignetCore
import SignetCrypto
import SignetManifest
import SignetPackage

/// One way a resource's bytes reach the staging directory: the seam of phase 2.
///
/// An install asks its sources in order (``ResourceSources``); the first that
/// holds the file stages it — verified against the manifest (size, SHA-256) and its signature,
/// given its attributes and mode — and the others are not asked. A source that does not hold
/// the file, or finds its copy is not the signed content, answers nil with nothing staged. The
/// package itself comes last and always answers. The ways today:
///
/// - ``RangedUpdate``: over range requests, a file the installed tree (or an earlier, cut run)
///   already holds, copied or shared; and a changed chunked file rebuilt from the installed
///   copy's chunks, the rest fetched (`ChunkRebuild.swift`);
/// - ``SharedTree``: from a package file, an unchanged file shared with the installed tree (a
///   hard link) or copied from it;
/// - ``PackageStream``: streamed from the package (local, or fetched by range), checked as it
///   streams.
///
/// A fifth way is one conformer, placed in ``ResourceSources``' order.
protocol ResourceSource: AnyObject {
    /// Stages `file`, the `index`th resource in manifest order; nil when this source does not
    /// hold it (nothing is staged then).
    func stage(_ file: Manifest.File, index: Int, in context: StagingContext) throws -> Installer.Job.Staged?
}

/// What every source is given to stage one resource.
struct StagingContext {
    let job: Installer.Job
    let staging: Staging
    /// The verified manifest and its key; nil for a bare package.
    let checked: PackageReader.Checked?
    /// The key that signed the resources staged so far (a bare package's files are each checked
    /// against every trusted key; this is the first one's).
    let signer: PublicKey?
    let progress: ProgressCounter?
    /// Hands the resource's signature and digest to the batched checks on the second core.
    let later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?
}

/// The sources phase 2 asks, in order: what is already here first, the package last.
struct ResourceSources {
    private let reusing: [any ResourceSource]
    private let package: PackageStream

    init(ranged: RangedUpdate?, shared: SharedTree?) {
        var reusing: [any ResourceSource] = []
        if let ranged { reusing.append(ranged) }
        if let shared { reusing.append(shared) }
        self.reusing = reusing
        package = PackageStream(ranged: ranged)
    }

    /// Stages `file` from the first source that holds it; the package holds every file.
    func stage(_ file: Manifest.File, index: Int, in context: StagingContext) throws -> Installer.Job.Staged {
        for source in reusing {
            if let staged = try source.stage(file, index: index, in: context) { return staged }
        }
        return try package.stream(file, in: context)
    }
}

/// The package as a source: the resource's entry streamed from the archive (a local file, or
/// fetched by range requests) into the staging directory, checked as it streams. It holds every
/// file, so it comes last.
final class PackageStream: ResourceSource {
    /// Over ranges, counts what was fetched.
    private let ranged: RangedUpdate?

    init(ranged: RangedUpdate?) { self.ranged = ranged }

    func stage(_ file: Manifest.File, index: Int, in context: StagingContext) throws -> Installer.Job.Staged? {
        try stream(file, in: context)
    }

    /// Streams `file`'s entry into the staging directory; throws when it is not the signed content.
    func stream(_ file: Manifest.File, in context: StagingContext) throws -> Installer.Job.Staged {
        let staged = try context.job.stage(
            file, into: context.staging, checked: context.checked, signer: context.signer,
            progress: context.progress, later: context.later)
        ranged?.countFetched(file)
        return staged
    }
}

extension SharedTree: ResourceSource {
    func stage(_ file: Manifest.File, index: Int, in context: StagingContext) throws -> Installer.Job.Staged? {
        guard let checked = context.checked, holds(file),
            let staged = try stage(file, job: context.job, into: context.staging, checked: checked, later: context.later)
        else { return nil }
        context.progress?.add(bytes: Int(clamping: file.size))
        return staged
    }
}

extension RangedUpdate: ResourceSource {
    func stage(_ file: Manifest.File, index: Int, in context: StagingContext) throws -> Installer.Job.Staged? {
        guard let checked = context.checked, reuses(index) else { return nil }
        return try copy(file, index: index, job: context.job, into: context.staging, checked: checked, later: context.later)
    }
}
